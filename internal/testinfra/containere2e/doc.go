// Package containere2e runs render as its users run it: the project's
// container image (Dockerfile) as the sidecar of a Kratix-style pod, and the
// docker-compose.yaml quickstart, against Gitea and MinIO running as
// containers on the same network.
//
// The tests need a Docker engine and images that scripts/containers.sh sets
// up (`make test-containers`, and `make test` as one of its steps): render's
// image built by `make image`, and local stand-ins for the images that
// cannot be pulled on the test machines — gitea/gitea and minio/minio under
// the exact tags docker-compose.yaml names, built from the same Gitea
// version and a MinIO built from source on a Debian base, and golang for
// the Dockerfile's builder. The script exports RENDER_TEST_DOCKER and the
// other variables the tests read; without them the tests skip, and with
// CI=true they fail.
//
// TestSidecarPod is a pod without Kubernetes: a "workflow" container writes
// /kratix/output and /kratix/metadata into shared volumes while render's
// image watches them as Kubernetes' restricted profile runs it (user 65532,
// a read-only root file system with only its volumes, no capabilities), and
// pushes over HTTP and SSH to Gitea and to MinIO. TestQuickstart runs
// `docker-compose up` of the repository's docker-compose.yaml, unchanged, in
// a copy of the repository, and follows the steps its documentation gives.
//
// Containers run outside the test's process tree: every test removes what
// it started when it ends, also when it fails, and scripts/containers.sh
// removes whatever is left before stopping the engine.
package containere2e
