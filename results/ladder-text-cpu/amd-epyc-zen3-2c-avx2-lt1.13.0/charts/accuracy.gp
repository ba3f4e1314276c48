set datafile separator ','
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set title 'Test accuracy per rung'."\n".'ladder-text-cpu on amd-epyc-zen3-2c-avx2-lt1.13.0' noenhanced
set ylabel 'test accuracy (%)' noenhanced
set xlabel 'rung'
set yrange [0:*]
set offsets 0,0,graph 0.18,0
set grid ytics
set xtics rotate by -20 noenhanced nomirror
set key top left noenhanced
set terminal svg size 960,540 dynamic font "sans,12" background "white"
set output 'accuracy.svg.part'
plot 'accuracy.csv' skip 1 using 2:xtic(1) title 'this machine' lc rgb '#2b6cb0', '' skip 1 using 5 title 'article (A100)' lc rgb '#dd6b20', '' skip 1 using ($0-1.0/6):3:(0):($4-$3) with vectors heads size 0.04,90 lw 1.5 lc rgb '#1a202c' notitle, '' skip 1 using ($0-1.0/6):(valid(4) ? $4 : $2):($2<10 ? sprintf("%.2f",$2) : sprintf("%.1f",$2)) with labels rotate by 90 left offset 0,0.4 font ",9" notitle, '' skip 1 using ($0+1.0/6):5:($5<10 ? sprintf("%.2f",$5) : sprintf("%.1f",$5)) with labels rotate by 90 left offset 0,0.4 font ",9" notitle, '' skip 1 using ($0-1.0/6):(0):(valid(2) ? "" : "n/a") with labels rotate by 90 left offset 0,0.4 font ",8" tc rgb "#555555" notitle, '' skip 1 using ($0+1.0/6):(0):(valid(5) ? "" : "n/a") with labels rotate by 90 left offset 0,0.4 font ",8" tc rgb "#555555" notitle
set output
set terminal pngcairo size 960,540 font "sans,11"
set output 'accuracy.png.part'
plot 'accuracy.csv' skip 1 using 2:xtic(1) title 'this machine' lc rgb '#2b6cb0', '' skip 1 using 5 title 'article (A100)' lc rgb '#dd6b20', '' skip 1 using ($0-1.0/6):3:(0):($4-$3) with vectors heads size 0.04,90 lw 1.5 lc rgb '#1a202c' notitle, '' skip 1 using ($0-1.0/6):(valid(4) ? $4 : $2):($2<10 ? sprintf("%.2f",$2) : sprintf("%.1f",$2)) with labels rotate by 90 left offset 0,0.4 font ",9" notitle, '' skip 1 using ($0+1.0/6):5:($5<10 ? sprintf("%.2f",$5) : sprintf("%.1f",$5)) with labels rotate by 90 left offset 0,0.4 font ",9" notitle, '' skip 1 using ($0-1.0/6):(0):(valid(2) ? "" : "n/a") with labels rotate by 90 left offset 0,0.4 font ",8" tc rgb "#555555" notitle, '' skip 1 using ($0+1.0/6):(0):(valid(5) ? "" : "n/a") with labels rotate by 90 left offset 0,0.4 font ",8" tc rgb "#555555" notitle
set output
