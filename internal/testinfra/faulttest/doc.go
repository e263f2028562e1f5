// Package faulttest holds render's fault tests: the render binary, built
// once per test run and run as a child process, against real Gitea and
// MinIO servers (internal/testinfra/testenv) while faults are injected:
//
//   - a store that is down when a render starts and comes back a few seconds
//     later (private servers, stopped and started by the test);
//   - a render killed with SIGKILL in the middle of writing 1,000 files
//     (Gitea, a local repository, MinIO): readers see the old state or the
//     new one, never a mix, and a rerun completes;
//   - 16 renders at once, as separate processes, on one branch and one bucket;
//   - credentials that must never appear in any output (text, JSON, debug
//     logs, failing authentication, unreachable stores, watch mode);
//   - paths and links that try to leave a destination's folder or the
//     output folder.
//
// The tests need the servers of scripts/testservers.sh: `make test` starts
// them. Without them the tests that need them skip, or fail when CI=true.
// The package has no non-test code.
package faulttest
