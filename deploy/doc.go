// Package deploy holds how render is deployed — the container image's
// Dockerfile (at the repository root) and the native-sidecar pod example —
// and the tests that check them on machines without a container engine: the
// binary is static, the Dockerfile's stages are pinned and non-root, and the
// pod example is wired as documented.
package deploy
