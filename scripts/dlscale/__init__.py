"""dlscale: the workflow's package, one subpackage per job; imports point down this list:
plan -> results -> launch -> train -> logs, data, jobs -> core (docs/development.md)."""
