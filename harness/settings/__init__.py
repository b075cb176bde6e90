"""The experiment's configuration as typed, frozen sections (`experiment.ExperimentConfig`, one
module a section), below everything that plans or runs it: it imports the engines' catalogs and
defaults, nothing of the harness past `harness.metrics`' constants. Every
`*Settings` the Hydra schema is derived from lives here, each backend's own too (`backends`: the
`backend` section's options), except the planner's (`plan`: a command's own settings). The
package imports nothing itself, so the load generator can take its part (`load`) alone."""
