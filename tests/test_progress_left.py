"""figure=all's progress line says how many configs of each study are still to run; configs may
share a name (an experiment on two datasets, or in two studies), and the count must still end at
none left, never below zero."""
from omegaconf import OmegaConf

from harness.commands.jobs import _Left


def test_configs_sharing_a_name_are_each_counted_once():
    todo = [OmegaConf.create({"name": n}) for n in ("a", "b", "a", "c", "a")]
    left = _Left(["serve", "serve", "serve", "fleet", "pd"], todo)
    lines = [left.after(n) for n in ("a", "a", "c", "b", "a")]
    assert lines == ["; left: serve 2, fleet 1, pd 1", "; left: serve 1, fleet 1, pd 1", "; left: serve 1, pd 1",
                     "; left: pd 1", "; none left"]
    assert left.after("unknown") == ""
