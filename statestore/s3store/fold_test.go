package s3store

func init() {
	// A write reads its load summaries after settling, to fold them, as
	// its random nonce says (one in eight): that would make the request
	// counts of these tests vary. No write folds here, but those of the
	// tests that mean to (their stores set foldEvery).
	ledgerFoldEvery = 1 << 30
}
