package engine

import (
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

func (e *Engine) openBucket(p *inputs.Platform, ref renderer.StoreRef, bs *inputs.BucketStateStore) (statestore.Store, string, error) {
	return nil, "", &renderer.InputError{File: bs.File, Where: "BucketStateStore " + bs.Name, Msg: "bucket stores are being wired in"}
}
