"""Live monitoring: rolling metrics on sampled traffic, sustained-drop alerts, Prometheus."""
