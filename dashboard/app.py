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


def main() -> None:
    """Build the navigation and the sidebar, then run the selected page."""
    st.set_page_config(page_title="IoT Pulse", page_icon=":material/sensors:", layout="wide")
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
