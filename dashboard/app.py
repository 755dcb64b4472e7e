"""Shim for `streamlit run dashboard/app.py`; the app ships in greenbench.dashboard_app."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without `pip install`

from greenbench.dashboard_app.app import main

main()
