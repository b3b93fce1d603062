module github.com/xce-project/libxce/go

go 1.19
