"""Pure measurement over trajectories, the spec model, the gate, the plots and the report."""
