"""dlscale: the workflow's package, one subpackage per job; imports point down this list:
plan -> reporting -> launch -> train -> measure -> logparse, data, jobs -> core
(docs/development.md)."""
