// Package deploy has no code: its tests check the files people deploy and
// read, which no other test runs, and what would break a user's `docker
// compose up` that CI, which has no Docker engine, cannot run: Docker
// Compose's own validation of compose.yaml (`docker compose config`), that
// every file, volume and service it references exists, that no two
// services publish one port, that the vendors reach every NATS node and the
// database Compose defines, that Prometheus scrapes every vendor and NATS
// node and loads the alerting rules (which promtool checks and unit-tests),
// that the Grafana dashboard reads only metrics a real vendor exposes, and
// that docker/nats.conf parses as the server reads it, and that
// .dockerignore keeps every file the image is built from.
//
// Beyond Compose: the systemd units of deploy/systemd pass `systemd-analyze
// verify`, and they and the Kubernetes example of deploy/kubernetes give
// the vendor only variables it reads (vendor -h), the same ones the
// runbook's table lists; the runbook (docs/operations.md) has an entry for
// every shipped alert; every relative link and anchor of every Markdown
// page resolves; the README stays an on-ramp, and its Go program builds,
// runs against a real vendor and burns no more IDs per start than its
// prefetch; and the decode replies the pages show have the fields a vendor
// sends. (That the configuration table of docs/configuration.md matches the
// vendor is tested in cmd/vendor, by reflection on its Config.)
package deploy
