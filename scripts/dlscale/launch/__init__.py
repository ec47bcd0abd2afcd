"""Who starts a point and how it ends: launch.py's launcher and a user's own command."""
