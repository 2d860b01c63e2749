"""The Streamlit side that several pages share (``ui.shared``).

``lab/`` never imports streamlit, and a ``.py`` file in ``pages/`` would
show up as a page of its own in the sidebar, so what the pages have in
common on the Streamlit side lives here, beside them.
"""
