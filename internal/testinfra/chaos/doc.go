// Package chaos is render's fault campaign: seeded trials of concurrent
// renders against every real store (git over HTTP with Gitea, git over SSH,
// S3 with MinIO, OCI with distribution's registry) while faults are
// injected, each checked by a checker of the store's final state.
//
// A trial is drawn from a seed (Generate): three to five workloads (promise
// workflows, written to every destination, and resource requests, written
// to one), most of them rendered once without faults first; then three to
// seven render processes of the real render binary started within 1.5 s
// (new workloads, changes, deletes, the same workload twice at about the
// same time, outputs repeated byte for byte, a drain of a cordoned
// destination), and one to four faults: toxics of a TCP proxy in front of
// the server (github.com/Shopify/toxiproxy/v2 as a library, in this
// process, on loopback: reset_peer, limit_data cutting every connection
// after K bytes, latency, bandwidth, a timeout that never answers) or a
// restart of the server (stopped and started again while renders run).
// Renders are killed with SIGKILL or stopped with SIGTERM at a drawn
// moment, and some get a --retry-deadline that expires while the faults
// last. CPU starvation is drawn from a random stream of its own (so every
// seed keeps its renders and faults): a busy-loop process on every core
// while the renders run in half the trials, and about one render in four
// paused (SIGSTOP) and resumed (SIGCONT) seconds later. The faults end, the
// servers are healthy again, and, as the seed
// says, every workload gets a last render without faults. Then the store
// is read straight from the server (go-git, minio-go, oras-go; never with
// render's own store code) and checked (see check for the rules): nothing
// that exited 0 was lost, no workload is a mix of two renders, no file
// belongs to no workload and the records match the files, nothing a writer
// holds only while it works outlives its lease, a render that failed left
// its whole update or nothing, and every destination builds as Flux builds
// it (internal/fluxcheck).
//
// A seed replays its schedule exactly; the timing of processes and servers
// is the machine's, so a replay meets the same faults at the same moments
// of the schedule, not necessarily at the same point of each render. A
// failing trial prints its seed, the schedule, what each render did and
// said, and every violation.
//
// TestCampaign runs a short list of seeds per store in `make test` (the
// servers of scripts/testservers.sh; each store gets a private server,
// since trials restart it). `make chaos` runs the long campaign: -seeds N
// trials per store from -first, or until -duration, and prints a table of
// trials, renders, faults injected by kind and violations.
package chaos
