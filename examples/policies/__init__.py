"""Example scheduling policies, written as a researcher's own package would write them."""
