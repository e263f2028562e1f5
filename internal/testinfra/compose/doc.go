// Package compose checks docker-compose.yaml at the repository's root
// without a container engine: every service has a pinned image or a build,
// every volume, port and file it references exists, and the platform it
// hands render loads.
package compose
