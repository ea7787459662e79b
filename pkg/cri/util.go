package cri

import "time"

func secondsDuration(s int64) time.Duration {
	if s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}
