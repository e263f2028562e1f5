package inputs

// Kinds are the store kinds this package's own tests load platforms with.
// Package storekind imports this one, so only the external tests can
// import it: storekind_test.go sets Kinds to storekind.Default.
var Kinds StoreKinds
