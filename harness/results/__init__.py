"""The results store: run directories written atomically (`store`), the one summary schema its
writer and the analysis loader share (`schema`), and drift against reference runs (`drift`)."""
