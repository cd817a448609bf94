"""Dashboard tests (qtui/tui/): state, recording derivation, headless app, snapshots."""
