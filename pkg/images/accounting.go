package images

import "unique"

// accounting tracks which layers the images not (yet) planned for removal
// hold, so that the bytes a removal frees are exact: a layer is freed when
// the last image holding it goes, and counted once.
type accounting struct {
	exact  bool
	refs   map[unique.Handle[string]]int32
	layers [][]Layer // per image, by index in the planned slice: its distinct layers
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
	total := 0
	for i := range images {
		total += len(images[i].Layers)
	}
	a.refs = make(map[unique.Handle[string]]int32, total)
	a.layers = make([][]Layer, len(images))
	for i := range images {
		distinct := distinctLayers(images[i].Layers)
		for _, l := range distinct {
			a.refs[l.Key]++
		}
		a.layers[i] = distinct
	}
	return a
}

// remove marks images[i] as removed and returns the bytes that frees.
func (a *accounting) remove(images []Image, i int) uint64 {
	if !a.exact {
		return images[i].Size
	}
	var freed uint64
	for _, l := range a.layers[i] {
		a.refs[l.Key]--
		if a.refs[l.Key] == 0 {
			freed += l.Size
		}
	}
	return freed
}

// alone returns what removing images[i] now, and nothing else, would free.
func (a *accounting) alone(images []Image, i int) uint64 {
	if !a.exact {
		return images[i].Size
	}
	var freed uint64
	for _, l := range a.layers[i] {
		if a.refs[l.Key] == 1 {
			freed += l.Size
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
