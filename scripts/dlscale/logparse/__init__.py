"""Reading text logs: the line grammar, one stream's runs and a job's streams combined,
files and live output."""
