package images

import (
	"slices"
	"sync"
	"unique"
)

// accounting tracks which layers the images not (yet) planned for removal
// hold, so that the bytes a removal frees are exact: a layer is freed when
// the last image holding it goes, and counted once.
type accounting struct {
	exact bool
	// refs counts, per layer (by dense index), the images holding it.
	refs []int32
	// idx and size are, per image (by index in the planned slice), its
	// distinct layers' dense indexes and their sizes.
	idx  [][]int32
	size [][]uint64
}

// layerMemo remembers, per image ID, the image's distinct layers as dense
// indexes, so that accounting counts layer references in a slice instead of
// hashing every layer of every image at each plan. An entry applies only
// while the image's layers are the ones it was made from (compared key by
// key and size by size, which is cheap next to hashing); others are
// rebuilt. The memo does not change what a plan says, only how fast it is
// made. Plans may run concurrently: mu guards the memo, and what an
// accounting keeps of it (idx and size slices) is never written again.
type layerMemo struct {
	mu      sync.Mutex
	index   map[unique.Handle[string]]int32
	byImage map[string]memoEntry
}

type memoEntry struct {
	layers []Layer // as given, to check the entry still applies
	idx    []int32
	size   []uint64
}

// account makes the accounting for images: exact when every image has
// layers; a mix would count some bytes twice, so then CRI sizes for all.
func (m *layerMemo) account(images []Image) *accounting {
	a := &accounting{exact: len(images) > 0}
	for i := range images {
		if images[i].Layers == nil {
			a.exact = false
			return a
		}
	}
	a.idx = make([][]int32, len(images))
	a.size = make([][]uint64, len(images))
	m.mu.Lock()
	total := 0
	for i := range images {
		total += len(images[i].Layers)
	}
	// Forget what no longer exists: images gone since (whose layers keep
	// their indexes meanwhile) are dropped when they outnumber the present.
	if m.byImage == nil || len(m.byImage) > 2*len(images)+1024 || len(m.index) > 2*total+8192 {
		m.index = make(map[unique.Handle[string]]int32, total)
		m.byImage = make(map[string]memoEntry, len(images))
	}
	for i := range images {
		img := &images[i]
		e, ok := m.byImage[img.ID]
		if !ok || !sameLayers(e.layers, img.Layers) {
			e = m.entry(img.Layers)
			m.byImage[img.ID] = e
		}
		a.idx[i], a.size[i] = e.idx, e.size
	}
	a.refs = make([]int32, len(m.index))
	m.mu.Unlock()
	for _, idx := range a.idx {
		for _, j := range idx {
			a.refs[j]++
		}
	}
	return a
}

// entry numbers the distinct layers of one image.
func (m *layerMemo) entry(layers []Layer) memoEntry {
	distinct := distinctLayers(layers)
	// A copy: the caller may reuse its slice.
	e := memoEntry{layers: slices.Clone(layers), idx: make([]int32, len(distinct)), size: make([]uint64, len(distinct))}
	for k, l := range distinct {
		j, ok := m.index[l.Key]
		if !ok {
			j = int32(len(m.index))
			m.index[l.Key] = j
		}
		e.idx[k], e.size[k] = j, l.Size
	}
	return e
}

func sameLayers(a, b []Layer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// remove marks images[i] as removed and returns the bytes that frees.
func (a *accounting) remove(images []Image, i int) uint64 { return a.free(images, i, true) }

// alone returns what removing images[i] now, and nothing else, would free.
func (a *accounting) alone(images []Image, i int) uint64 { return a.free(images, i, false) }

// free returns what removing images[i] frees, given the images not removed
// yet: the layers no other of them holds. With remove, the removal counts
// for the next calls.
func (a *accounting) free(images []Image, i int, remove bool) uint64 {
	if !a.exact {
		return images[i].Size
	}
	var freed uint64
	for k, j := range a.idx[i] {
		if a.refs[j] == 1 {
			freed += a.size[i][k]
		}
		if remove {
			a.refs[j]--
		}
	}
	return freed
}

// distinctLayers drops repeated keys. Images hold a few dozen layers at
// most, so a scan beats a map.
func distinctLayers(layers []Layer) []Layer {
	if !hasDuplicateKey(layers) {
		return layers
	}
	out := make([]Layer, 0, len(layers))
	for i, l := range layers {
		dup := false
		for _, prev := range layers[:i] {
			if prev.Key == l.Key {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, l)
		}
	}
	return out
}

func hasDuplicateKey(layers []Layer) bool {
	for i := range layers {
		for j := range i {
			if layers[i].Key == layers[j].Key {
				return true
			}
		}
	}
	return false
}
