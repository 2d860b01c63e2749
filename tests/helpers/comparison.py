"""What a comparison's notes show."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def notes_shown(at: AppTest) -> list[str]:
    """The messages listed in the Compare page's expander of warning details."""
    box = next(e for e in at.expander if e.label == "Details of the notes")
    return [line[2:] for line in box.markdown[0].value.split("\n")]
