// Package driver is what a state store backend implements and what it is
// given in return, for the authors of statestore/gitstore, s3store,
// ocistore and memstore (as database/sql/driver is for a SQL driver).
//
// A backend is a Backend: each write begins a Committer, which supplies a
// snapshot to plan on and a conditional commit of what was planned, and
// declares the optional steps it takes (a hand-over after a lost race, a
// lock to release, work to finish, a half-written state). Write, the one
// write loop, plans with statestore/planner, commits, and starts over when
// another writer was first; Writer turns it into a Store's Apply and
// ApplyAll, and declares the batches it writes as one change
// (statestore.Capabilities). The helpers backends share for naming what
// failed (Wrap, InOp, ConflictError) are here too, and so is the
// classification of failures below a backend's protocol that every
// backend shares (network.go: TranslateNetwork, Transient, NameNotFound,
// TLSFailure): what is unreachable (and so retried, see
// statestore/wait), and what is reported at once.
package driver
