module github.com/xce-project/libxce/daemons

go 1.19

require github.com/xce-project/libxce/go v0.1.0

// Build against this checkout's package (a published version needs no replace).
replace github.com/xce-project/libxce/go => ../go
