"""Dashboard widgets. Each reads a `DashState` in `show(state)` and never talks to a feed."""
