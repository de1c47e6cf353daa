"""Wrappers around one learner: averaging, instance recycling and the sub-expert conversion."""
