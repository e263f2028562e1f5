//go:build !(linux || darwin)

package inputs

// The system's limits are not known here: messages say a path is too long
// without numbers.
const (
	maxName = 0
	maxPath = 0
)
