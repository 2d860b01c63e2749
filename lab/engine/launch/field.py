"""``FormField``: one run option's declaration (widget, help, command-line flag and words, the
trainer's flag, range). The fields themselves are ``lab.engine.launch.form.FIELDS`` (the
performance knobs' from ``lab.engine.launch.knobs``), which re-exports this class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class FormField:
    """One widget of the launch form. ``only_if=(field, value)``: enabled only while that field has
    that value (a tuple of values: one of them)."""

    name: str
    label: str
    kind: str  # radio | select | int | float | check | text | lines | gpus
    key: str
    help: str = ""
    options: tuple[str, ...] = ()
    option_labels: tuple[str, ...] = ()
    step: float = 1
    fmt: str | None = None
    only_if: tuple[str, str | tuple[str, ...]] | None = None
    # options asked for when drawn (costly to list)
    options_of: Callable[[], tuple[str, ...]] | None = None
    flag: str = ""  # the command line's name where it is not the field's (repeatable ones)
    cli_help: str = ""  # the command line's words where the form's do not fit a terminal
    trainer_flag: str = ""  # the trainer's flag for an option it is given only when set
    limits: tuple[float, float] | None = None  # the allowed range, in ``unit``
    unit: str = ""
    # an option that changes the speed of a step: Compare's words when the runs it compares differ
    # in it ("The runs differ in <differs> …"), and in its count of notes (``cause``, where several
    # options share one, or the words differ); empty: Compare does not hold runs to it
    differs: str = ""
    cause: str = ""
    vary_example: str = ""  # the values a refused ``--vary`` suggests, where the default's do not

    def choices(self) -> tuple[str, ...]:
        """The options of a select or radio: ``options``, or what ``options_of`` lists now."""
        return self.options or (self.options_of() if self.options_of else ())

    def shown(self, option: str) -> str:
        """The text shown for one of the options."""
        return dict(zip(self.options, self.option_labels)).get(option, option)

    def enabled(self, values: Mapping[str, Any]) -> bool:
        """Whether the widget takes input, given the values above it (a disabled one gives None)."""
        if self.only_if is None:
            return True
        field, wanted = self.only_if
        return values.get(field) in (wanted if isinstance(wanted, tuple) else (wanted,))

    def cli_flag(self) -> str:
        return "--" + (self.flag or self.name).replace("_", "-")

    def cli_words(self) -> str:
        """``--help``'s text: the command line's own words, else the form's help, else its label."""
        return self.cli_help or self.help or self.label
