// Package deploy has no code: its tests check that compose.yaml, the
// Dockerfile, .dockerignore and the files under docker/ agree with each other
// and with the project (services, ports, volumes, LEAF_* variables,
// Prometheus targets, packages built), since CI has no Docker engine to run
// them. With a working `docker compose`, they also run `docker compose config`.
package deploy
