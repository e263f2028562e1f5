package testenv

import (
	"os"
	"testing"
)

// Environment variables of the OCI registry and the oras CLI, written by
// scripts/testservers.sh start.
const (
	EnvRegistryAddr     = "RENDER_TEST_REGISTRY_ADDR" // 127.0.0.1:PORT (plain HTTP)
	EnvRegistryUser     = "RENDER_TEST_REGISTRY_USER"
	EnvRegistryPassword = "RENDER_TEST_REGISTRY_PASSWORD"
	EnvRegistryPIDFile  = "RENDER_TEST_REGISTRY_PIDFILE"
	EnvORAS             = "RENDER_TEST_ORAS" // path of the oras CLI
)

// RegistryServer is a running OCI registry (distribution) test server,
// plain HTTP on loopback, with one htpasswd user.
type RegistryServer struct {
	addr     string
	user     string
	password string
	oras     string
	ctl      serverControl
}

var registryVars = []string{EnvRegistryAddr, EnvRegistryUser, EnvRegistryPassword, EnvRegistryPIDFile, EnvORAS}

// Registry returns the shared registry test server described by the
// RENDER_TEST_REGISTRY_* variables; it skips the test (fails it when
// CI=true) if they are unset.
func Registry(t testing.TB) *RegistryServer {
	t.Helper()
	requireEnv(t, "OCI registry", registryVars...)
	get := os.Getenv
	return &RegistryServer{
		addr:     get(EnvRegistryAddr),
		user:     get(EnvRegistryUser),
		password: get(EnvRegistryPassword),
		oras:     get(EnvORAS),
		ctl:      newServerControl("registry", get(EnvServersDir), get(EnvRegistryPIDFile)),
	}
}

// Addr returns host:port.
func (r *RegistryServer) Addr() string { return r.addr }

// User returns the user name the registry accepts.
func (r *RegistryServer) User() string { return r.user }

// Password returns the user's password.
func (r *RegistryServer) Password() string { return r.password }

// ORAS returns the path of the oras CLI built beside the servers.
func (r *RegistryServer) ORAS() string { return r.oras }

// Stop stops the shared registry (restarted when the test ends).
func (r *RegistryServer) Stop(t testing.TB) { t.Helper(); r.ctl.stop(t) }

// Start restarts a stopped registry on its old port and data.
func (r *RegistryServer) Start(t testing.TB) { t.Helper(); r.ctl.start(t) }
