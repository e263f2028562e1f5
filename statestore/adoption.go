package statestore

import "regexp"

// Adoption names where Kratix kept a workload's files in one store.
type Adoption struct {
	// Folders are store-relative folders whose files are the workload's:
	// each <destination path>/<the workload's Kratix folder> (see bookkeeping.CheckAdoption).
	Folders []string `json:"folders,omitempty"`
	// Ledgers find Kratix's .kratix ledgers of the workload.
	Ledgers []LedgerMatch `json:"ledgers,omitempty"`
}

// LedgerMatch finds a workload's ledgers in one .kratix folder: their
// names carry a random part (Kratix's Work name), so they are matched
// (see LedgerPattern).
type LedgerMatch struct {
	// Dir is the store-relative .kratix folder of a destination.
	Dir string `json:"dir"`
	// Namespace is the namespace of the workload's Work.
	Namespace string `json:"namespace"`
	// Work is Kratix's Work name of the workload, before its random
	// suffix (KratixWorkName of one of the workload's identifiers).
	Work string `json:"work"`
	// Destination is the destination's name, as the ledger's name holds it.
	Destination string `json:"destination"`
}

// LedgerPattern is the regular expression the names of the ledgers of a
// Work's placements on destination dest match:
// <namespace>-<work>-<5>.<dest>-<group id>.yaml, the group id as its
// first submatch.
func LedgerPattern(namespace, work, dest string) string {
	return "^" + regexp.QuoteMeta(namespace+"-"+work+"-") + `[a-z0-9]{5}\.` + regexp.QuoteMeta(dest) + `-([0-9a-f]{5})\.yaml$`
}

// Pattern is m's LedgerPattern.
func (m LedgerMatch) Pattern() string { return LedgerPattern(m.Namespace, m.Work, m.Destination) }
