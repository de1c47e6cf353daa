"""V-Combine (voting over on-line hypotheses) and the VR-Combine preset."""
