"""Views of Traces: the terminal tables and HTML / PNG pages (``render``) and the interactive
terminal timeline (``tui``), with one palette shared by all.

Imports trace, plan and inputs; never sim, costs, search or predict (the TUI is handed its
predictor). Plotly and Textual are imported only inside the modules that draw.
"""
