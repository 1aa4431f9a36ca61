package main

import "testing"

func TestPctl(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // 100 .. 1, unsorted
	}
	if got := pctl(v, 50); got != 50 {
		t.Errorf("p50 = %v, want 50", got)
	}
	if got := pctl(v, 99); got != 99 {
		t.Errorf("p99 = %v, want 99", got)
	}
	if got := pctl([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v, want 7", got)
	}
	if got := pctl(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v, want 0", got)
	}
	if v[0] != 100 {
		t.Error("pctl sorted its argument")
	}
}
