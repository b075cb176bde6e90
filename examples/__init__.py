"""Examples of extending the harness from outside its packages (see ARCHITECTURE.md)."""
