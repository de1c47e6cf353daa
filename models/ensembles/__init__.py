"""Ensembles of learners: error-correcting output codes, on-line bagging and boosting."""
