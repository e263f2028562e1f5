package chaos

import (
	"fmt"
	"strings"
)

// A store's platform documents, as both campaigns (and this package's
// scenario tests) write them: the store, and when it has credentials its
// Secret, named after the store with "-credentials", in namespace default.

// GitStoreDocs is a GitStateStore named name at url, branch main, under
// path; auth is its authMethod ("" for none, then no Secret) and secret
// the Secret's string data as key, value pairs.
func GitStoreDocs(name, url, path, auth string, secret ...string) string {
	spec := []string{"url: " + url, "branch: main", "path: " + path}
	if auth != "" {
		spec = append(spec, "authMethod: "+auth)
	}
	return storeDocs("platform.kratix.io/v1alpha1", "GitStateStore", name, spec, secret)
}

// BucketStoreDocs is a BucketStateStore named name: bucket on the S3
// endpoint (plain HTTP, region us-east-1), under path, with an access key.
func BucketStoreDocs(name, endpoint, bucket, path, accessKeyID, secretAccessKey string) string {
	spec := []string{"endpoint: " + endpoint, "bucketName: " + bucket, "path: " + path, "insecure: true",
		"region: us-east-1", "authMethod: accessKey"}
	return storeDocs("platform.kratix.io/v1alpha1", "BucketStateStore", name, spec,
		[]string{"accessKeyID", accessKeyID, "secretAccessKey", secretAccessKey})
}

// OCIStoreDocs is an OCIStateStore named name: repository repo of the
// registry at addr (plain HTTP), created if missing, with a user and
// password.
func OCIStoreDocs(name, addr, repo, user, password string) string {
	spec := []string{fmt.Sprintf("registry: %q", addr), "repository: " + repo, "insecure: true", "create: true"}
	return storeDocs("render.dev/v1alpha1", "OCIStateStore", name, spec, []string{"username", user, "password", password})
}

// storeDocs is a store of kind named name with spec's lines, and, when
// secret (key, value pairs) is not empty, its Secret.
func storeDocs(apiVersion, kind, name string, spec, secret []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata: {name: %s}\nspec:\n", apiVersion, kind, name)
	for _, l := range spec {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if len(secret) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "  secretRef: {name: %s-credentials, namespace: default}\n", name)
	fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s-credentials, namespace: default}\nstringData:\n", name)
	for i := 0; i+1 < len(secret); i += 2 {
		fmt.Fprintf(&b, "  %s: %q\n", secret[i], secret[i+1])
	}
	return b.String()
}
