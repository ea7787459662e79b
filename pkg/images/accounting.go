package images

// accounting tracks which layers the images not (yet) planned for removal
// hold, so that the bytes a removal frees are exact: a layer is freed when
// the last image holding it goes, and counted once.
type accounting struct {
	exact  bool
	refs   map[string]int
	layers map[string][]Layer // image ID -> its distinct layers
}

// newAccounting uses layers when every image has them; a mix would count
// some bytes twice, so then it falls back to CRI sizes for all.
func newAccounting(images []Image) *accounting {
	a := &accounting{exact: len(images) > 0}
	for i := range images {
		if images[i].Layers == nil {
			a.exact = false
			return a
		}
	}
	a.refs = make(map[string]int, len(images)*4)
	a.layers = make(map[string][]Layer, len(images))
	for i := range images {
		img := &images[i]
		seen := make(map[string]bool, len(img.Layers))
		distinct := make([]Layer, 0, len(img.Layers))
		for _, l := range img.Layers {
			if seen[l.Key] {
				continue
			}
			seen[l.Key] = true
			distinct = append(distinct, l)
			a.refs[l.Key]++
		}
		a.layers[img.ID] = distinct
	}
	return a
}

// remove marks img as removed and returns the bytes that frees.
func (a *accounting) remove(img *Image) uint64 {
	if !a.exact {
		return img.Size
	}
	var freed uint64
	for _, l := range a.layers[img.ID] {
		a.refs[l.Key]--
		if a.refs[l.Key] == 0 {
			freed += l.Size
		}
	}
	return freed
}

// alone returns what removing img now, and nothing else, would free.
func (a *accounting) alone(img *Image) uint64 {
	if !a.exact {
		return img.Size
	}
	var freed uint64
	for _, l := range a.layers[img.ID] {
		if a.refs[l.Key] == 1 {
			freed += l.Size
		}
	}
	return freed
}
