package ocistore

// SpillAbove lets the tests of package ocistore_test spill every layer.
var SpillAbove = &spillAbove
