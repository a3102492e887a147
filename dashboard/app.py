"""Streamlit entry point: ``streamlit run dashboard/app.py``.

The entry point renders the shared sidebar (filters kept in the URL, refresh
controls) and hands over to the selected page under ``views/``.
"""

from __future__ import annotations

import pandas  # noqa: F401  (see below)
import streamlit as st

from dashboard import ui
from dashboard.pages import PAGES

# pandas is imported up front, before any page runs: Streamlit imports it lazily while
# rendering, and Altair takes it from sys.modules, so a session rendering a chart while
# another session's thread is halfway through that import failed with "partially
# initialized module 'pandas' has no attribute 'Timestamp'".


# The browser tab's icon, inline: Streamlit sends an SVG as a data URL, whereas a
# Material or emoji icon makes the browser fetch an image from Google's font servers.
PAGE_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24">'
    '<circle cx="12" cy="12" r="3" fill="#1565c0"/>'
    '<path d="M7.8 7.8a6 6 0 0 0 0 8.4M16.2 7.8a6 6 0 0 1 0 8.4M4.9 4.9a10 10 0 0 0 0 14.2'
    'M19.1 4.9a10 10 0 0 1 0 14.2" fill="none" stroke="#1565c0" stroke-width="2" '
    'stroke-linecap="round"/></svg>'
)


def main() -> None:
    """Build the navigation and the sidebar, then run the selected page."""
    st.set_page_config(page_title="IoT Pulse", page_icon=PAGE_ICON, layout="wide")
    pages = [
        st.Page(path, title=title, icon=icon, default=index == 0)
        for index, (path, title, icon, _) in enumerate(PAGES)
    ]
    page = st.navigation(pages)
    settings = ui.dashboard_settings()
    st.sidebar.title("IoT Pulse")
    ui.sidebar(settings)
    own = next((p[3] for p in PAGES if p[1] == page.title), ())
    ui.keep_only_params((*ui.GLOBAL_PARAMS, *own))
    page.run()


main()
