"""The learner contract: instances, parameters and their constraints, state documents,
hypotheses, the learner base classes, the table of kinds and the plumbing of nested learners."""
