"""The results store: run directories written atomically (`store`), and the one summary schema
its writer and the analysis loader share (`schema`)."""
