package selection

import "runtime"

func runtimeGosched() { runtime.Gosched() }
