"""What several test modules share, in one place (no test module imports another):
`records` (a run folder's JSON lines, a kill at a file's first write), `studies` (a study
planned from sections, the published study's epochs, a completed run's folder),
`prediction` (a series made from the model's own formula and its breakdown records)."""
