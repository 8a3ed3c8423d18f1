"""Policies, evaluation runs and the leaderboard."""
