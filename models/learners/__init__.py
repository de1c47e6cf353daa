"""The basic on-line learners: Winnow, Balanced Winnow, the Perceptron, ALMA, Committee,
multi-class Winnow and Weighted Majority."""
