// placeholder: being written (issue #4)
