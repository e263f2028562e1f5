package storekind

import (
	"strings"
	"testing"
)

func TestForge(t *testing.T) {
	for _, tc := range []struct {
		url, apiURL string
		want        Forge
		err         string
	}{
		{url: "https://git.example.com/platform/state.git", want: Forge{APIURL: "https://git.example.com/api/v1", Owner: "platform", Repo: "state"}},
		{url: "http://127.0.0.1:3000/org/repo", want: Forge{APIURL: "http://127.0.0.1:3000/api/v1", Owner: "org", Repo: "repo"}},
		{url: "https://example.com/gitea/org/repo.git", want: Forge{APIURL: "https://example.com/gitea/api/v1", Owner: "org", Repo: "repo"}},
		{url: "git@git.example.com:org/repo.git", apiURL: "https://git.example.com/api/v1/", want: Forge{APIURL: "https://git.example.com/api/v1", Owner: "org", Repo: "repo"}},
		{url: "git@git.example.com:org/repo.git", err: "spec.pullRequest.apiURL is needed"},
		{url: "file:///srv/state.git", err: "spec.url is a repository on this machine"},
		{url: "/srv/state.git", err: "spec.url is a repository on this machine"},
		{url: "https://git.example.com/state.git", err: "does not end in owner/repository"},
		{url: "https://git.example.com/org/repo", apiURL: "ftp://x/api", err: "spec.pullRequest.apiURL is not an http(s) URL"},
		{url: "https://git.example.com/org/repo", apiURL: "https://u:p@x/api", err: "spec.pullRequest.apiURL is not an http(s) URL"},
	} {
		s := &GitStateStore{URL: tc.url, PullRequest: &PullRequest{APIURL: tc.apiURL}}
		got, err := ForgeOf(s)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: want error %q, got %v (%+v)", tc.url, tc.err, err, got)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: got %+v, want %+v", tc.url, got, tc.want)
		}
	}
}
