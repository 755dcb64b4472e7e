"""Running configurations: the launcher (child processes, storing results), each rank's
worker (build, warm up, measure), the measured window's tally, and progress display."""
