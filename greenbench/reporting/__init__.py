"""Reading stored results back: REF resolution, leaderboard rows and Pareto fronts,
Markdown reports with plots, and the terminal views of `list`, `show` and `doctor`."""
