"""The vocabulary every room shares, talking to nothing outside: errors, files written
whole, the run contract (records, statuses, file names), names and defaults, the config
schema, the columns registry, command-line helpers."""
