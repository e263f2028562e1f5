// Package fluxe2e tests that real Flux reconciles what render writes.
//
// Each test runs the render binary (built once per test run) as Kratix runs
// it in a pipeline, into a real Gitea repository, MinIO bucket or OCI
// registry, then applies what `render bootstrap flux` prints, as printed, to
// a real kube-apiserver (with its etcd) that Flux's own source-controller
// and kustomize-controller reconcile as local processes, and reads the API
// server back with plain REST calls:
//
//   - a promise workflow and a resource workflow into a GitRepository, two
//     Kustomizations: the objects appear, the promise's dependencies (a CRD)
//     before the resources (an object of that CRD);
//   - the same into a MinIO bucket read by a Bucket source with spec.prefix;
//   - the same into the OCI registry, read by an OCIRepository on the
//     destination's artifact, and a changed resource updated in place;
//   - `--action delete` of the resource, then of the promise: Flux prunes
//     their objects;
//   - `render drain`: the resource's objects leave one worker's
//     Kustomization (its inventory and ownership) for the other's;
//   - aggregatedYAML and none destinations, read by one Kustomization each.
//   - Secrets render encrypts with SOPS (spec.secrets.policy encrypt), in a
//     nestedByMetadata destination in git and an aggregatedYAML one in a
//     bucket: kustomize-controller decrypts them with the worker's age key
//     and applies the workflow's values; no value is in the store.
//
// There is no kubelet, scheduler or controller-manager: objects are stored,
// nothing runs them, and a pruned namespace stays Terminating.
//
// The stack comes from scripts/testservers.sh (`with --flux`, which
// `make test` uses for this package). Without it the tests skip, or fail
// when CI=true. The package has no non-test code.
package fluxe2e
